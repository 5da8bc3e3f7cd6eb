# What the openstack module adds to the contract (../variables.tf); scripts/tf_contract.py merges
# both into terraform/modules/openstack/variables.tf and terraform/roots/openstack/main.tf.

variable "instances" {
  description = <<-EOT
    Every instance this provider should run, keyed by instance key (<op_id>-<index>). flavor and
    image are Nova flavor and Glance image names, network a Neutron network name (overrides
    settings.network), disk_gb the size of a boot volume (boot from volume; without it the
    flavor's local disk is used). tags are the instance's own tags (owner tags xce:op_id,
    xce:template, xce:epoch, ... plus template tags), merged over common_tags into the server
    metadata; the xce:* tags also become server tags "key=value". zone is the availability
    zone (over extra.availability_zone and settings.availability_zone); subnet names the Neutron
    network of the server's port (over network: a server's network block takes no subnet).
    extra takes availability_zone and server_group (a server group UUID). Nova has no idempotency token:
    the key is not sent to the cloud (see the module README). An xce:max_lifetime tag is
    honoured by the in-host shutdown at that age, which powers the server off; Nova has no
    expiry of its own, so it is stopped, not deleted.
  EOT

  validation {
    condition     = alltrue([for k, i in var.instances : i.disk_gb == null ? true : i.disk_gb >= 1 && floor(i.disk_gb) == i.disk_gb])
    error_message = "disk_gb must be a whole number of GB, at least 1."
  }

  validation {
    # Nova takes at most 65535 bytes of base64-encoded user data.
    condition     = alltrue([for k, i in var.instances : length(base64encode(i.user_data)) <= 65535])
    error_message = "Nova user data is limited to 65535 bytes once base64-encoded (about 48 KiB)."
  }

  validation {
    condition = alltrue([
      for k, i in var.instances : alltrue([for x in keys(i.extra) : contains(["availability_zone", "server_group"], x)])
    ])
    error_message = "The openstack module's extra keys are availability_zone and server_group."
  }

  validation {
    # Nova metadata: keys and values at most 255 characters.
    condition = alltrue([
      for k, i in var.instances : alltrue([for tk, tv in i.tags : length(tk) >= 1 && length(tk) <= 255 && length(tv) <= 255])
    ])
    error_message = "Nova metadata keys must be 1-255 characters and values at most 255."
  }
}

variable "common_tags" {
  description = <<-EOT
    Tags every server this module creates carries (as metadata; the xce:* ones also as server
    tags): the owner tags xce:cluster and xce:provider plus the site's provider tags.
  EOT

  validation {
    condition     = alltrue([for tk, tv in var.common_tags : length(tk) >= 1 && length(tk) <= 255 && length(tv) <= 255])
    error_message = "Nova metadata keys must be 1-255 characters and values at most 255."
  }
}

variable "settings" {
  description = <<-EOT
    OpenStack settings. cloud (a clouds.yaml entry) and region configure the provider in the
    root; credentials never go here (clouds.yaml or OS_* environment). network: default Neutron
    network name. security_groups, key_pair, availability_zone, config_drive: launch parameters
    of every server. volume_type: Cinder type of boot volumes (disk_gb). list_tagged: part of
    the module contract (the orchestrator sets it false in shards >= 1); this module has no
    tagged listing, so it changes nothing here. catalogue_flavors and catalogue_zones: the Nova
    flavors (names) and zones of the catalogue root (terraform/catalogue/openstack, a
    template's select:), which the provider cannot list by itself.
  EOT
  type = object({
    cloud             = optional(string)
    region            = optional(string)
    network           = optional(string)
    security_groups   = optional(list(string))
    key_pair          = optional(string)
    availability_zone = optional(string)
    config_drive      = optional(bool)
    volume_type       = optional(string)
    catalogue_flavors = optional(list(string))
    catalogue_zones   = optional(list(string))
  })

  validation {
    condition     = var.settings.network == null ? true : trimspace(var.settings.network) != ""
    error_message = "settings.network, when set, must not be empty."
  }
}

variable "images" {
  description = <<-EOT
    Must stay empty: the Terraform OpenStack provider has no resource that makes an image from a
    server (openstack_images_image_v2 uploads a file), so this module bakes no images; a site
    snapshots a builder server itself (docs/images.md) and names the image by id.
  EOT

  validation {
    condition     = length(var.images) == 0
    error_message = "The openstack module makes no images: images must be empty (docs/images.md)."
  }
}
