# Root configuration of one Terraform working directory (<state_dir>/work/<cluster>/<provider>/)
# for an OpenStack project. The orchestrator copies this file there, the openstack module into
# ./module, and writes desired.tfvars.json (instances, common_tags, settings). Local backend:
# the state lives next to it. Credentials come from clouds.yaml (settings.cloud) or the OS_*
# environment, never from settings.

terraform {
  required_version = ">= 1.5.0"

  required_providers {
    openstack = {
      source  = "terraform-provider-openstack/openstack"
      version = ">= 2.0.0, < 4.0.0"
    }
  }
}

provider "openstack" {
  cloud  = var.settings.cloud
  region = var.settings.region
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
  description = "Owner tags xce:cluster and xce:provider plus the site's provider tags, on every server (see module `common_tags`)."
  type        = map(string)
}

variable "settings" {
  description = "OpenStack settings: cloud, region and launch parameters (see module `settings`)."
  type = object({
    cloud             = optional(string)
    region            = optional(string)
    network           = optional(string)
    security_groups   = optional(list(string))
    key_pair          = optional(string)
    availability_zone = optional(string)
    config_drive      = optional(bool)
    volume_type       = optional(string)
    list_tagged       = optional(bool, true)
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
  description = "Managed servers by instance key: id, name, address, launch_time, tags."
  value       = module.instances.instances
}

output "tagged" {
  description = "Always empty for OpenStack (see tagged_supported)."
  value       = module.instances.tagged
}

output "tagged_supported" {
  description = "Whether `tagged` is a real listing of the cloud (false for OpenStack)."
  value       = module.instances.tagged_supported
}
