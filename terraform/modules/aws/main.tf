locals {
  # Per-instance tags: the common owner and site tags, the conventional Name tag (the console
  # shows it), then the instance's own tags. The same map goes on the instance and its volumes.
  tags = {
    for key, inst in var.instances : key => merge(var.common_tags, { Name = inst.name }, inst.tags)
  }

  # The cloud backstop: each instance's maximum lifetime in seconds (its owner tag
  # xce:max_lifetime, checked by the instances validation), null for none. EC2 has no maximum
  # lifetime of its own for an instance: the user data powers the host off at that age and the
  # shutdown behaviour "terminate" makes EC2 terminate it (see the README).
  max_lifetime = {
    for key, inst in var.instances : key => tonumber(lookup(inst.tags, "xce:max_lifetime", null))
  }

  # The states in which an instance still exists and may cost money.
  live_states = ["pending", "running", "shutting-down", "stopping", "stopped"]
}

resource "aws_instance" "this" {
  for_each = var.instances

  ami           = each.value.image
  instance_type = each.value.flavor
  # The offering's subnet first (its entry's subnet), then the template's network, then the
  # provider's setting; the offering's zone likewise over extra.availability_zone.
  subnet_id = each.value.subnet != null ? each.value.subnet : (each.value.network != null ? each.value.network : var.settings.subnet_id)

  vpc_security_group_ids      = var.settings.security_group_ids
  key_name                    = var.settings.key_name
  iam_instance_profile        = var.settings.iam_instance_profile
  associate_public_ip_address = var.settings.associate_public_ip_address
  availability_zone           = each.value.zone != null ? each.value.zone : lookup(each.value.extra, "availability_zone", null)
  placement_group             = lookup(each.value.extra, "placement_group", null)

  user_data = each.value.user_data != "" ? each.value.user_data : null
  # A changed user data must neither stop/start nor replace a running host (see ignore_changes).
  user_data_replace_on_change = false

  # "terminate" by default: a poweroff inside the host, the max_lifetime shutdown included,
  # terminates the instance instead of leaving a stopped one that still costs its volumes.
  instance_initiated_shutdown_behavior = var.settings.shutdown_behavior

  # Both go out in RunInstances' TagSpecifications, so the instance and every volume attached at
  # launch carry the owner tags from their first second (root_block_device.tags would be set by
  # a later call, and a failure there is only logged by the provider).
  tags        = local.tags[each.key]
  volume_tags = local.tags[each.key]

  dynamic "root_block_device" {
    for_each = each.value.disk_gb == null ? [] : [each.value.disk_gb]
    content {
      volume_size           = root_block_device.value
      volume_type           = var.settings.root_volume_type
      encrypted             = var.settings.encrypt_volumes
      delete_on_termination = true
    }
  }

  dynamic "instance_market_options" {
    for_each = var.settings.market == "spot" ? ["spot"] : []
    content {
      market_type = instance_market_options.value
      spot_options {
        spot_instance_type             = "one-time"
        instance_interruption_behavior = "terminate"
      }
    }
  }

  metadata_options {
    http_endpoint = "enabled"
    http_tokens   = var.settings.imdsv2_required ? "required" : "optional"
  }

  lifecycle {
    # What an instance was launched with stays: a changed template (AMI, type, cloud-init, disk)
    # applies to new instances only and never replaces or stop/starts a running host. Tags stay
    # managed, so tag drift is corrected in place.
    ignore_changes = [ami, instance_type, user_data, root_block_device, availability_zone, subnet_id]

    precondition {
      condition = (
        local.tags[each.key]["xce:cluster"] == var.common_tags["xce:cluster"] &&
        local.tags[each.key]["xce:provider"] == var.common_tags["xce:provider"]
      )
      error_message = "Instance ${each.key}: its tags override xce:cluster or xce:provider with a value other than common_tags'; the instance would escape this cluster's listing."
    }

    precondition {
      condition     = length(local.tags[each.key]) <= 50
      error_message = "Instance ${each.key}: EC2 allows at most 50 tags per resource."
    }

    precondition {
      # The backstop's shutdown must end the instance: with "stop" a forgotten instance would
      # linger stopped, still paying for its volumes and holding its quota.
      condition     = local.max_lifetime[each.key] == null || var.settings.shutdown_behavior == "terminate"
      error_message = "Instance ${each.key}: it has an xce:max_lifetime but settings.shutdown_behavior is \"stop\", so its shutdown at the end of the lifetime would only stop it; use \"terminate\" (the default) or remove max_lifetime."
    }
  }
}

# aws_instance exports no launch time; the instance data source does (one DescribeInstances per
# instance). Read after the instance exists, so a new instance has it right after apply.
data "aws_instance" "launched" {
  for_each = var.instances

  instance_id = aws_instance.this[each.key].id
}

# Every instance carrying this cluster's tag, whoever made it: the cloud's view for orphan
# detection. No depends_on on purpose: the listing must be read during plan (and refresh-only
# plan), not deferred to apply. aws_instances gives ids and IPs only; the per-id data source
# adds launch time, state and tags.
# settings.list_tagged false (every shard of a provider but shard 0): neither data source is
# read, so DescribeInstances runs once per provider and a shard's state holds only its own.
data "aws_instances" "tagged" {
  count = var.settings.list_tagged ? 1 : 0

  instance_tags        = { "xce:cluster" = var.common_tags["xce:cluster"] }
  instance_state_names = local.live_states
}

data "aws_instance" "tagged" {
  for_each = toset(flatten(data.aws_instances.tagged[*].ids))

  instance_id = each.key
}

# Baked images (xceprov image bake, docs/images.md): an AMI of the builder instance, made once;
# the builder is returned afterwards and the AMI keeps what it was made from. EBS snapshots
# behind it carry the same tags.
locals {
  # Per-image tags: the common owner and site tags, then the image's own (kind, template, built-from).
  image_tags = { for key, img in var.images : key => merge(var.common_tags, img.tags) }
}

resource "aws_ami_from_instance" "this" {
  for_each = var.images

  name                    = each.value.name
  source_instance_id      = each.value.instance_id
  snapshot_without_reboot = false
  tags                    = local.image_tags[each.key]

  lifecycle {
    ignore_changes = [name, source_instance_id, snapshot_without_reboot]
  }
}

# The account's own AMIs carrying this cluster's tag (shard 0 only, as the instance listing).
data "aws_ami_ids" "tagged" {
  count = var.settings.list_tagged ? 1 : 0

  owners = ["self"]
  filter {
    name   = "tag:xce:cluster"
    values = [var.common_tags["xce:cluster"]]
  }
}

data "aws_ami" "tagged" {
  for_each = toset(flatten(data.aws_ami_ids.tagged[*].ids))

  owners = ["self"]
  filter {
    name   = "image-id"
    values = [each.key]
  }
}
