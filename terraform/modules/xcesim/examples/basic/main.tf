# Two hosts of the `cpu` template in the simulated cloud, as one op of the orchestrator asks for
# them. The orchestrator writes the same three inputs into desired.tfvars.json; here they are
# spelt out. Run it from this directory as README.md shows.

terraform {
  required_version = ">= 1.5.0"

  required_providers {
    xcesim = {
      source  = "xce/xcesim"
      version = "0.1.0"
    }
  }
}

# The simulated cloud's store (the embedded world uses <sim_state_dir>/cloud.sqlite); a fresh
# file here gives the example a cloud of its own.
provider "xcesim" {
  store = "cloud.sqlite"
}

module "instances" {
  source = "../.."

  # Keyed by instance key <op_id>-<index>, which is also the cloud's idempotency token.
  # Baked images (docs/images.md): none in this small op.
  images = {}

  instances = {
    "op-6745a1b2-3f9c01-000" = {
      name     = "demo-cpu-3f9c01-0"
      template = "cpu"
      flavor   = "c8.large"
      image    = "debian-12"
      tags = {
        "xce:op_id"    = "op-6745a1b2-3f9c01"
        "xce:epoch"    = "1.1"
        "xce:template" = "cpu"
        "team"         = "hpc"
      }
      user_data = "#cloud-config\nhostname: demo-cpu-3f9c01-0\n"
    }
    "op-6745a1b2-3f9c01-001" = {
      name     = "demo-cpu-3f9c01-1"
      template = "cpu"
      flavor   = "c8.large"
      image    = "debian-12"
      tags = {
        "xce:op_id"    = "op-6745a1b2-3f9c01"
        "xce:epoch"    = "1.1"
        "xce:template" = "cpu"
        "team"         = "hpc"
      }
      user_data = "#cloud-config\nhostname: demo-cpu-3f9c01-1\n"
    }
  }

  # On every object; xce:cluster is also what the `tagged` listing filters on.
  common_tags = {
    "xce:cluster"  = "demo"
    "xce:provider" = "sim"
  }

  settings = {
    store = "cloud.sqlite"
  }
}

output "instances" {
  description = "The two instances by instance key: id, name, address, launch_time, tags."
  value       = module.instances.instances
}

output "tagged" {
  description = "Every live instance of cluster demo in the store, by id (what the orphan scan reads)."
  value       = module.instances.tagged
}
