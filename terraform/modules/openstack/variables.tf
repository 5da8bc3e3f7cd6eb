# The contract every provider module implements (docs/provider-modules.md): `instances`,
# `common_tags` and a module-specific `settings`. The orchestrator writes all three into
# desired.tfvars.json; no value is ever spliced into Terraform code.

variable "instances" {
  description = <<-EOT
    Every instance this provider should run, keyed by instance key (<op_id>-<index>). flavor and
    image are Nova flavor and Glance image names, network a Neutron network name (overrides
    settings.network), disk_gb the size of a boot volume (boot from volume; without it the
    flavor's local disk is used). tags are the instance's own tags (owner tags xce:op_id,
    xce:template, xce:epoch, ... plus template tags), merged over common_tags into the server
    metadata; the xce:* tags also become server tags "key=value". extra takes
    availability_zone and server_group (a server group UUID). Nova has no idempotency token:
    the key is not sent to the cloud (see the module README).
  EOT
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

  validation {
    condition     = alltrue([for k, i in var.instances : can(regex("^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$", k))])
    error_message = "Every instance key must be 1-64 characters of letters, digits, '.', '_', ':' or '-' (it is the idempotency token)."
  }

  validation {
    condition = alltrue([
      for k, i in var.instances :
      lookup(i.tags, "xce:op_id", "") != "" && lookup(i.tags, "xce:template", "") != ""
    ])
    error_message = "Every instance's tags must carry non-empty owner tags xce:op_id and xce:template."
  }

  validation {
    condition     = alltrue([for k, i in var.instances : startswith(k, "${lookup(i.tags, "xce:op_id", "")}-")])
    error_message = "Every instance key must be <op_id>-<index>, where op_id is the instance's xce:op_id tag."
  }

  validation {
    condition     = alltrue([for k, i in var.instances : i.template == lookup(i.tags, "xce:template", "")])
    error_message = "Every instance's template must equal its xce:template tag."
  }

  validation {
    # The cloud backstop (providers.<name>.max_lifetime), an optional owner tag: whole seconds
    # from launch, the same rule everywhere. Here the in-host shutdown at that age powers the server off; Nova has no expiry of its own, so it is stopped, not deleted.
    condition = alltrue([
      for k, i in var.instances : can(regex("^[1-9][0-9]{0,9}$", i.tags["xce:max_lifetime"])) if contains(keys(i.tags), "xce:max_lifetime")
    ])
    error_message = "An instance's xce:max_lifetime tag must be a whole number of seconds: 1 to 10 digits, no unit, sign or leading zero."
  }

  validation {
    condition     = alltrue([for k, i in var.instances : trimspace(i.name) != "" && i.flavor != "" && i.image != ""])
    error_message = "Every instance needs a non-empty name, flavor and image."
  }

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
  type        = map(string)

  validation {
    condition     = lookup(var.common_tags, "xce:cluster", "") != "" && lookup(var.common_tags, "xce:provider", "") != ""
    error_message = "common_tags must carry non-empty owner tags xce:cluster and xce:provider."
  }

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
    tagged listing, so it changes nothing here.
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
    list_tagged       = optional(bool, true)
  })

  validation {
    condition     = var.settings.network == null ? true : trimspace(var.settings.network) != ""
    error_message = "settings.network, when set, must not be empty."
  }
}
