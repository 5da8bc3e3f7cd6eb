# Root configuration of one Terraform working directory (<state_dir>/work/<cluster>/<provider>/)
# for an AWS account and region. The orchestrator copies this file there, the aws module into
# ./module, and writes desired.tfvars.json (instances, common_tags, settings). Local backend:
# the state lives next to it. Credentials come from the environment, the shared AWS config
# (settings.profile) or an instance role, never from settings.

terraform {
  required_version = ">= 1.5.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0.0, < 7.0.0"
    }
  }
}

provider "aws" {
  region  = var.settings.region
  profile = var.settings.profile
}

variable "instances" {
  description = "Every instance of this provider, keyed by instance key <op_id>-<index> (see module `instances`)."
  type = map(object({
    name      = string
    template  = string
    flavor    = string
    image     = string
    tags      = map(string)
    user_data = string
    disk_gb   = optional(number)
    network   = optional(string)
    extra     = optional(map(string), {})
  }))
}

variable "common_tags" {
  description = "Owner tags xce:cluster and xce:provider plus the site's provider tags, on every instance and volume (see module `common_tags`)."
  type        = map(string)
}

variable "settings" {
  description = "AWS settings: region, profile and launch parameters (see module `settings`)."
  type = object({
    region                      = string
    profile                     = optional(string)
    subnet_id                   = optional(string)
    security_group_ids          = optional(list(string))
    key_name                    = optional(string)
    iam_instance_profile        = optional(string)
    associate_public_ip_address = optional(bool)
    address                     = optional(string, "private")
    root_volume_type            = optional(string, "gp3")
    encrypt_volumes             = optional(bool, true)
    market                      = optional(string, "on-demand")
    shutdown_behavior           = optional(string, "terminate")
    imdsv2_required             = optional(bool, true)
    list_tagged                 = optional(bool, true)
  })
}

variable "fence" {
  description = "Epoch tag <term>.<seq> of the lease this run was planned under; set by the orchestrator for every root, unused by this cloud (see docs/provider-modules.md)."
  type        = string
  default     = ""
}

module "instances" {
  source = "./module"

  instances   = var.instances
  common_tags = var.common_tags
  settings    = var.settings
}

output "instances" {
  description = "Managed instances by instance key: id, name, address, launch_time, tags."
  value       = module.instances.instances
}

output "tagged" {
  description = "Every live instance carrying this cluster's tag, by instance id (orphan detection)."
  value       = module.instances.tagged
}

output "tagged_supported" {
  description = "Whether `tagged` is a real listing of the cloud."
  value       = module.instances.tagged_supported
}
