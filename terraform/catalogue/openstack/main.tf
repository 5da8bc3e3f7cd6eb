# Catalogue root of an OpenStack project. The Terraform OpenStack provider has no data source
# that lists flavors: openstack_compute_flavor_v2 looks up ONE flavor (by name or by attributes).
# So the catalogue is the flavors the site names in settings.catalogue_flavors, each looked up
# for its vCPUs, RAM and extra specs; GPUs are read from the extra spec "resources:VGPU" or
# "pci_passthrough:alias" count when set (0 otherwise), zones from settings.catalogue_zones
# (Nova ties zones to host aggregates, not flavors: every listed flavor is offered in each).
# Nova gives no price: cost_per_hour is null and select: prices by cost_per_cpu_hour.
# Output `flavors`, the one shape every catalogue root gives (README.md). Data sources and
# outputs only: nothing in the project changes.

terraform {
  required_version = ">= 1.5.0"

  required_providers {
    openstack = {
      source  = "terraform-provider-openstack/openstack"
      version = ">= 2.0.0, < 4.0.0"
    }
  }
}

variable "settings" {
  description = "The provider's module settings (providers.<name>.settings); cloud and region are read here, and catalogue_flavors (list of flavor names) and catalogue_zones (list of availability zones)."
  type        = any
}

provider "openstack" {
  cloud  = try(var.settings.cloud, null)
  region = try(var.settings.region, null)
}

data "openstack_compute_flavor_v2" "each" {
  for_each = toset(try(var.settings.catalogue_flavors, []))
  name     = each.key
}

locals {
  zones = try(var.settings.catalogue_zones, [])
}

output "flavors" {
  description = "Every flavor named in settings.catalogue_flavors: name, cpus, memory_gb, gpus (from the vGPU or PCI alias extra spec), cost_per_hour (always null), zones (settings.catalogue_zones)."
  value = [
    for name, f in data.openstack_compute_flavor_v2.each : {
      name      = name
      cpus      = f.vcpus
      memory_gb = f.ram / 1024
      gpus = tonumber(try(
        f.extra_specs["resources:VGPU"],
        regex(":([0-9]+)$", f.extra_specs["pci_passthrough:alias"])[0],
        0,
      ))
      cost_per_hour = null
      zones         = local.zones
    }
  ]
}
