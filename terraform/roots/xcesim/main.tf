# Root configuration of one Terraform working directory (<state_dir>/work/<cluster>/<provider>/)
# for the simulated cloud. The orchestrator copies this file there, the xcesim module into
# ./module, and writes desired.tfvars.json (instances, common_tags, settings). Local backend:
# the state lives next to it.

terraform {
  required_version = ">= 1.5.0"

  required_providers {
    xcesim = {
      source  = "xce/xcesim"
      version = "0.1.0"
    }
  }
}

provider "xcesim" {
  store       = var.settings.store
  max_retries = var.settings.max_retries
  fence       = var.fence
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
  description = "Owner tags xce:cluster and xce:provider plus the site's provider tags, on every object (see module `common_tags`)."
  type        = map(string)
}

variable "settings" {
  description = "Simulated cloud settings: store (path of the SQLite store), max_retries and list_tagged (see module `settings`)."
  type = object({
    store       = string
    max_retries = optional(number, 0)
    list_tagged = optional(bool, true)
  })
}

variable "fence" {
  description = "Epoch tag <term>.<seq> of the lease this run was planned under (none standalone, \"\" outside the executor); the simulated cloud journals each mutation with it."
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
  description = "Every object carrying this cluster's tag, by cloud id: live ones and those terminated in the last hour with their state_reason (orphan detection, host loss)."
  value       = module.instances.tagged
}

output "tagged_supported" {
  description = "Whether `tagged` is a real listing of the cloud."
  value       = module.instances.tagged_supported
}
