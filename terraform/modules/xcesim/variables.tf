# The contract every provider module implements (docs/provider-modules.md): `instances`,
# `common_tags` and a module-specific `settings`. The orchestrator writes all three into
# desired.tfvars.json; no value is ever spliced into Terraform code.

variable "instances" {
  description = <<-EOT
    Every instance this provider should run, keyed by instance key (<op_id>-<index>). The key
    is the cloud idempotency token (xcesim client_token). name, flavor and image are the cloud
    side of the host template; tags are the instance's own tags (owner tags xce:op_id,
    xce:template, xce:epoch, ... plus template tags), merged over common_tags. disk_gb and
    network have no meaning in the simulated cloud and are accepted and ignored, so a template
    written for a real cloud also runs here; extra takes no keys here.
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
    # from launch, the same rule everywhere. Here the simulated cloud terminates the instance itself (reason expired) at launch_time plus that many seconds.
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
    condition     = alltrue([for k, i in var.instances : length(i.extra) == 0])
    error_message = "The xcesim module takes no extra keys (instances[*].extra must be empty)."
  }
}

variable "common_tags" {
  description = <<-EOT
    Tags every object this module creates carries: the owner tags xce:cluster and xce:provider
    plus the site's provider tags. The xce:cluster value is also the filter of the `tagged`
    listing used for orphan detection.
  EOT
  type        = map(string)

  validation {
    condition     = lookup(var.common_tags, "xce:cluster", "") != "" && lookup(var.common_tags, "xce:provider", "") != ""
    error_message = "common_tags must carry non-empty owner tags xce:cluster and xce:provider."
  }
}

variable "settings" {
  description = <<-EOT
    Settings of the simulated cloud provider, used by the root's provider block (the module
    itself needs nothing else). store: path of the simulated cloud's SQLite store.
    max_retries: how often the provider retries an injected retryable API error itself before
    reporting it (default 0: the error reaches Terraform and the orchestrator decides).
    list_tagged: read the cluster's tagged listing (default true); the orchestrator sets it
    false in every shard of a provider but shard 0, so the listing is read once per provider.
  EOT
  type = object({
    store       = string
    max_retries = optional(number, 0)
    list_tagged = optional(bool, true)
  })

  validation {
    condition     = trimspace(var.settings.store) != ""
    error_message = "settings.store (path of the simulated cloud store) must not be empty."
  }

  validation {
    condition     = var.settings.max_retries >= 0 && floor(var.settings.max_retries) == var.settings.max_retries
    error_message = "settings.max_retries must be a whole number, 0 or more."
  }
}
