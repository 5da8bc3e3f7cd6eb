# The contract every provider module takes (docs/provider-modules.md, "The contract"), written
# once: scripts/tf_contract.py writes each module's variables.tf from these variables plus what
# the module adds in modules/<module>.tf, and each root's variables, module call and outputs.
# A variable added here reaches every module and every root; the orchestrator writes its value
# into desired.tfvars.json (orchestrator/workspace/workdir.py). No value is ever spliced into
# Terraform code. A module may replace a description, add validation blocks and add fields to an
# object type (settings), never change a type or drop a validation.

variable "instances" {
  description = <<-EOT
    Every instance this provider should run, keyed by instance key (<op_id>-<index>). name,
    flavor and image are the cloud side of the host template; tags are the instance's own tags
    (owner tags xce:op_id, xce:template, xce:epoch, ... plus template tags), merged over
    common_tags. disk_gb, network and extra have a module-specific meaning. zone and subnet
    (null: the module's own choice) place the instance as its offering says (the xce:offering
    tag names the offering; docs/provider-modules.md, "Zones and subnets"). power_state
    (running or stopped; null: leave the instance as it is) is set only for warm-pool
    instances, and only on modules that can stop and start an instance in place (xcesim); the
    orchestrator refuses a warm pool on any other module.
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
    # Optional and last: a module that cannot stop instances never sees it set.
    power_state = optional(string)
    # The instance's offering's placement (null: wherever the cloud chooses).
    zone   = optional(string)
    subnet = optional(string)
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
    # from launch, the same rule everywhere (orchestrator/model/tags.py). What happens at that
    # age is the module's (its README, docs/provider-modules.md "Maximum lifetime").
    condition = alltrue([
      for k, i in var.instances : can(regex("^[1-9][0-9]{0,9}$", i.tags["xce:max_lifetime"])) if contains(keys(i.tags), "xce:max_lifetime")
    ])
    error_message = "An instance's xce:max_lifetime tag must be a whole number of seconds: 1 to 10 digits, no unit, sign or leading zero."
  }

  validation {
    condition     = alltrue([for k, i in var.instances : i.power_state == null || contains(["running", "stopped"], coalesce(i.power_state, "running"))])
    error_message = "An instance's power_state must be running, stopped or null."
  }

  validation {
    condition     = alltrue([for k, i in var.instances : trimspace(i.name) != "" && i.flavor != "" && i.image != ""])
    error_message = "Every instance needs a non-empty name, flavor and image."
  }
}

variable "images" {
  description = <<-EOT
    Images this provider should keep, keyed by image key (<op_id>-image): each made once from
    the builder instance instance_id (a baked image, `xceprov image bake`, docs/images.md) and
    never remade (what it was made from is frozen). name is the image's name; tags are its own
    tags (owner tags xce:op_id, xce:epoch, xce:template, xce:kind=image and the built-from
    records), merged over common_tags. Only shard 0 of a provider holds images.
  EOT
  type = map(object({
    name        = string
    instance_id = string
    tags        = map(string)
  }))
  # Defaulted, unlike the other contract variables: a desired set written before images existed
  # (or any shard but shard 0) holds none, and must plan exactly as before.
  default = {}

  validation {
    condition     = alltrue([for k, i in var.images : startswith(k, "${lookup(i.tags, "xce:op_id", "")}-") && lookup(i.tags, "xce:op_id", "") != ""])
    error_message = "Every image key must be <op_id>-image, where op_id is the image's non-empty xce:op_id tag."
  }

  validation {
    condition     = alltrue([for k, i in var.images : lookup(i.tags, "xce:kind", "") == "image" && lookup(i.tags, "xce:template", "") != ""])
    error_message = "Every image's tags must carry xce:kind=image and a non-empty xce:template."
  }

  validation {
    condition     = alltrue([for k, i in var.images : trimspace(i.name) != "" && i.instance_id != ""])
    error_message = "Every image needs a non-empty name and the id of the instance it is made from."
  }
}

variable "common_tags" {
  description = <<-EOT
    Tags every object this module creates carries: the owner tags xce:cluster and xce:provider
    plus the site's provider tags.
  EOT
  type        = map(string)

  validation {
    condition     = lookup(var.common_tags, "xce:cluster", "") != "" && lookup(var.common_tags, "xce:provider", "") != ""
    error_message = "common_tags must carry non-empty owner tags xce:cluster and xce:provider."
  }
}

variable "settings" {
  description = <<-EOT
    Module-specific settings (providers.<name>.settings of xceprov.yaml). list_tagged: read the
    cluster's tagged listing (default true); the orchestrator sets it false in every shard of a
    provider but shard 0, so the listing is read once per provider.
  EOT
  type = object({
    list_tagged = optional(bool, true)
  })
}
