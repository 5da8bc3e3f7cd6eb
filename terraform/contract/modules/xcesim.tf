# What the xcesim module adds to the contract (../variables.tf); scripts/tf_contract.py merges
# both into terraform/modules/xcesim/variables.tf and terraform/roots/xcesim/main.tf.

variable "instances" {
  description = <<-EOT
    Every instance this provider should run, keyed by instance key (<op_id>-<index>). The key
    is the cloud idempotency token (xcesim client_token). name, flavor and image are the cloud
    side of the host template; tags are the instance's own tags (owner tags xce:op_id,
    xce:template, xce:epoch, ... plus template tags), merged over common_tags. disk_gb and
    network have no meaning in the simulated cloud and are accepted and ignored, so a template
    written for a real cloud also runs here; extra takes no keys here. The simulated cloud
    terminates an instance tagged xce:max_lifetime itself (reason expired) at launch_time plus
    that many seconds. power_state (running or stopped) stops or starts the instance in
    place (a warm-pool instance is launched stopped); null leaves it as it is.
  EOT

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
