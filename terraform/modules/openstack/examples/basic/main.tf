# Two Nova servers of a `cpu` template, as one op of the orchestrator asks for them: one on the
# project's burst network, one booting from a 100 GB volume. The orchestrator writes the same
# three inputs into desired.tfvars.json; here they are spelt out. Replace the cloud, flavor,
# image and network names with your project's (README.md).

terraform {
  required_version = ">= 1.5.0"

  required_providers {
    openstack = {
      source  = "terraform-provider-openstack/openstack"
      version = ">= 2.0.0, < 4.0.0"
    }
  }
}

# Credentials come from the clouds.yaml entry `site` (or the OS_* environment), never from here.
provider "openstack" {
  cloud = "site"
}

module "instances" {
  source = "../.."

  # Keyed by instance key <op_id>-<index>; the op id is also the xce:op_id tag.
  # Baked images (docs/images.md): none in this small op.
  images = {}

  instances = {
    "op-6745a1b2-3f9c01-000" = {
      name     = "site1-cpu-3f9c01-0"
      template = "cpu"
      flavor   = "m1.xlarge"
      image    = "debian-12"
      tags = {
        "xce:op_id"    = "op-6745a1b2-3f9c01"
        "xce:epoch"    = "4.12"
        "xce:template" = "cpu"
        "team"         = "hpc"
      }
      user_data = "#cloud-config\nhostname: site1-cpu-3f9c01-0\n"
    }
    "op-6745a1b2-3f9c01-001" = {
      name     = "site1-cpu-3f9c01-1"
      template = "cpu"
      flavor   = "m1.xlarge"
      image    = "debian-12"
      tags = {
        "xce:op_id"    = "op-6745a1b2-3f9c01"
        "xce:epoch"    = "4.12"
        "xce:template" = "cpu"
        "team"         = "hpc"
      }
      user_data = "#cloud-config\nhostname: site1-cpu-3f9c01-1\n"
      disk_gb   = 100
      extra = {
        availability_zone = "nova"
      }
    }
  }

  # Into every server's metadata; the xce:* ones also become server tags.
  common_tags = {
    "xce:cluster"  = "site1"
    "xce:provider" = "openstack"
    "cost-center"  = "hpc-burst"
  }

  settings = {
    cloud           = "site"
    network         = "burst"
    security_groups = ["default", "xce-worker"]
    key_pair        = "xce-burst"
  }
}

output "instances" {
  description = "The two servers by instance key: id, name, address, launch_time, tags."
  value       = module.instances.instances
}
