# Catalogue root of the simulated cloud: reads its flavor catalogue (the xcesim_flavors data
# source) and outputs it as `flavors`, the one shape every catalogue root gives (README.md).
# The orchestrator copies this file into <state_dir>/catalogue/<cluster>/<provider>/, writes
# catalogue.tfvars.json (settings: the provider's module settings) and applies it: data sources
# and outputs only, nothing in the cloud changes.

terraform {
  required_version = ">= 1.5.0"

  required_providers {
    xcesim = {
      source  = "xce/xcesim"
      version = "0.1.0"
    }
  }
}

variable "settings" {
  description = "The provider's module settings (providers.<name>.settings over the module's defaults); store is read here."
  type        = any
}

provider "xcesim" {
  store       = var.settings.store
  max_retries = try(var.settings.max_retries, 0)
}

data "xcesim_flavors" "all" {}

output "flavors" {
  description = "Every flavor of the catalogue: name, cpus, memory_gb, gpus, cost_per_hour (null: no price), zones."
  value = [
    for f in data.xcesim_flavors.all.flavors : {
      name          = f.name
      cpus          = f.cpus
      memory_gb     = f.memory_gb
      gpus          = f.gpus
      cost_per_hour = f.cost_per_hour
      zones         = f.zones
    }
  ]
}
