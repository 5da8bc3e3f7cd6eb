# The contract every provider module implements (docs/provider-modules.md): `instances`,
# `common_tags` and a module-specific `settings`. The orchestrator writes all three into
# desired.tfvars.json; no value is ever spliced into Terraform code.

variable "instances" {
  description = <<-EOT
    Every instance this provider should run, keyed by instance key (<op_id>-<index>). flavor is
    the EC2 instance type, image the AMI id, network a subnet id (overrides settings.subnet_id),
    disk_gb the root volume size. tags are the instance's own tags (owner tags xce:op_id,
    xce:template, xce:epoch, ... plus template tags), merged over common_tags onto the instance
    and its volumes. extra takes availability_zone and placement_group.
    aws_instance has no client token argument: the key is not sent to EC2 (see the module README).
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
    # from launch, the same rule everywhere. Here the in-host shutdown at that age terminates the instance (shutdown_behavior "terminate").
    condition = alltrue([
      for k, i in var.instances : can(regex("^[1-9][0-9]{0,9}$", i.tags["xce:max_lifetime"])) if contains(keys(i.tags), "xce:max_lifetime")
    ])
    error_message = "An instance's xce:max_lifetime tag must be a whole number of seconds: 1 to 10 digits, no unit, sign or leading zero."
  }

  validation {
    condition     = alltrue([for k, i in var.instances : trimspace(i.name) != "" && i.flavor != "" && i.image != ""])
    error_message = "Every instance needs a non-empty name, flavor (instance type) and image (AMI id)."
  }

  validation {
    condition     = alltrue([for k, i in var.instances : i.disk_gb == null ? true : i.disk_gb >= 1 && floor(i.disk_gb) == i.disk_gb])
    error_message = "disk_gb must be a whole number of GiB, at least 1."
  }

  validation {
    # EC2 refuses user data over 16 KiB (before base64).
    condition     = alltrue([for k, i in var.instances : length(i.user_data) <= 16384])
    error_message = "EC2 user data is limited to 16 KiB."
  }

  validation {
    condition = alltrue([
      for k, i in var.instances : alltrue([for x in keys(i.extra) : contains(["availability_zone", "placement_group"], x)])
    ])
    error_message = "The aws module's extra keys are availability_zone and placement_group."
  }

  validation {
    # EC2 tag rules: keys 1-128 characters, values up to 256, no "aws:" prefix.
    condition = alltrue([
      for k, i in var.instances : alltrue([
        for tk, tv in i.tags : length(tk) >= 1 && length(tk) <= 128 && length(tv) <= 256 && !startswith(lower(tk), "aws:")
      ])
    ])
    error_message = "EC2 tag keys must be 1-128 characters without the aws: prefix, values at most 256 characters."
  }
}

variable "common_tags" {
  description = <<-EOT
    Tags every object this module creates carries (instances and their EBS volumes): the owner
    tags xce:cluster and xce:provider plus the site's provider tags. The xce:cluster value is
    also the filter of the `tagged` listing used for orphan detection.
  EOT
  type        = map(string)

  validation {
    condition     = lookup(var.common_tags, "xce:cluster", "") != "" && lookup(var.common_tags, "xce:provider", "") != ""
    error_message = "common_tags must carry non-empty owner tags xce:cluster and xce:provider."
  }

  validation {
    condition = alltrue([
      for tk, tv in var.common_tags : length(tk) >= 1 && length(tk) <= 128 && length(tv) <= 256 && !startswith(lower(tk), "aws:")
    ])
    error_message = "EC2 tag keys must be 1-128 characters without the aws: prefix, values at most 256 characters."
  }
}

variable "settings" {
  description = <<-EOT
    AWS settings. region (required) and profile configure the provider in the root; credentials
    never go here (environment, shared config or instance role). subnet_id,
    security_group_ids, key_name, iam_instance_profile, associate_public_ip_address: launch
    parameters of every instance. address: which IP the orchestrator reaches hosts on
    ("private" or "public"). root_volume_type and encrypt_volumes: the root volume when disk_gb
    is set. market: "on-demand" or "spot" (one-time, terminate on interruption).
    shutdown_behavior: what a shutdown from inside the host does ("terminate" or "stop").
    imdsv2_required: require IMDSv2 session tokens. list_tagged: read the cluster's tagged
    listing (default true); the orchestrator sets it false in every shard of a provider but
    shard 0, so the listing is read once per provider.
  EOT
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

  validation {
    condition     = trimspace(var.settings.region) != ""
    error_message = "settings.region must not be empty."
  }

  validation {
    condition     = contains(["private", "public"], var.settings.address)
    error_message = "settings.address must be \"private\" or \"public\"."
  }

  validation {
    condition     = contains(["on-demand", "spot"], var.settings.market)
    error_message = "settings.market must be \"on-demand\" or \"spot\"."
  }

  validation {
    condition     = contains(["terminate", "stop"], var.settings.shutdown_behavior)
    error_message = "settings.shutdown_behavior must be \"terminate\" or \"stop\"."
  }
}
