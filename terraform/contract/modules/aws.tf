# What the aws module adds to the contract (../variables.tf); scripts/tf_contract.py merges both
# into terraform/modules/aws/variables.tf and terraform/roots/aws/main.tf.

variable "instances" {
  description = <<-EOT
    Every instance this provider should run, keyed by instance key (<op_id>-<index>). flavor is
    the EC2 instance type, image the AMI id, network a subnet id (overrides settings.subnet_id),
    disk_gb the root volume size. tags are the instance's own tags (owner tags xce:op_id,
    xce:template, xce:epoch, ... plus template tags), merged over common_tags onto the instance
    and its volumes. zone is the availability zone and subnet a subnet id (both from the
    instance's offering; subnet over network and settings.subnet_id, zone over
    extra.availability_zone). extra takes availability_zone and placement_group.
    aws_instance has no client token argument: the key is not sent to EC2 (see the module README).
    An xce:max_lifetime tag is honoured by the in-host shutdown at that age, which terminates
    the instance (settings.shutdown_behavior "terminate").
  EOT

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
    shard 0, so the listing is read once per provider. catalogue_filters: EC2
    DescribeInstanceTypes filters (name -> values) of the catalogue root (terraform/catalogue/aws,
    a template's select:); unset: current-generation x86_64 types.
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
    catalogue_filters           = optional(map(list(string)))
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
