# Two EC2 hosts of a `cpu` template, as one op of the orchestrator asks for them: one in the
# provider's default subnet, one in a subnet of its own with a bigger root volume. The
# orchestrator writes the same three inputs into desired.tfvars.json; here they are spelt out.
# Replace the AMI, subnet and security group ids with your account's (README.md).

terraform {
  required_version = ">= 1.5.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0.0, < 7.0.0"
    }
  }
}

# Credentials come from the environment, the shared config or an instance role, never from here.
provider "aws" {
  region = "eu-west-1"
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
      flavor   = "c6i.2xlarge"
      image    = "ami-0abcdef1234567890"
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
      flavor   = "c6i.2xlarge"
      image    = "ami-0abcdef1234567890"
      tags = {
        "xce:op_id"    = "op-6745a1b2-3f9c01"
        "xce:epoch"    = "4.12"
        "xce:template" = "cpu"
        "team"         = "hpc"
      }
      user_data = "#cloud-config\nhostname: site1-cpu-3f9c01-1\n"
      disk_gb   = 100
      network   = "subnet-0fedcba9876543210"
      extra = {
        availability_zone = "eu-west-1b"
      }
    }
  }

  # On every instance and volume; xce:cluster is also what the `tagged` listing filters on.
  common_tags = {
    "xce:cluster"  = "site1"
    "xce:provider" = "aws-eu"
    "cost-center"  = "hpc-burst"
  }

  settings = {
    region             = "eu-west-1"
    subnet_id          = "subnet-0123456789abcdef0"
    security_group_ids = ["sg-0123456789abcdef0"]
    key_name           = "xce-burst"
  }
}

output "instances" {
  description = "The two instances by instance key: id, name, address, launch_time, tags."
  value       = module.instances.instances
}

output "tagged" {
  description = "Every live EC2 instance tagged xce:cluster = site1, by id (what the orphan scan reads)."
  value       = module.instances.tagged
}
