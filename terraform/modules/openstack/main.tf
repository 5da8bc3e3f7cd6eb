locals {
  # Per-instance tags: the common owner and site tags, then the instance's own tags. Nova
  # metadata holds them all.
  tags = { for key, inst in var.instances : key => merge(var.common_tags, inst.tags) }

  # Nova server tags are plain strings (at most 60 characters, no "/" or ","), filterable in the
  # server list API (microversion 2.26): the owner tags go there too, as "key=value".
  server_tags = {
    for key, tags in local.tags : key => sort([for tk, tv in tags : "${tk}=${tv}" if startswith(tk, "xce:")])
  }

  # Booting from a volume needs the image id, not its name.
  volume_images = toset([for key, inst in var.instances : inst.image if inst.disk_gb != null])
}

data "openstack_images_image_v2" "boot" {
  for_each = local.volume_images

  name        = each.key
  most_recent = true
}

resource "openstack_compute_instance_v2" "this" {
  for_each = var.instances

  name        = each.value.name
  flavor_name = each.value.flavor
  # With a boot volume the image goes into block_device; Nova refuses both.
  image_name = each.value.disk_gb == null ? each.value.image : null

  user_data         = each.value.user_data != "" ? each.value.user_data : null
  key_pair          = var.settings.key_pair
  security_groups   = var.settings.security_groups
  availability_zone = each.value.zone != null ? each.value.zone : lookup(each.value.extra, "availability_zone", var.settings.availability_zone)
  config_drive      = var.settings.config_drive

  metadata = local.tags[each.key]
  tags     = local.server_tags[each.key]

  dynamic "network" {
    # An offering's subnet names the Neutron network here (a server's network block takes no
    # subnet; Neutron picks the address in it: docs/provider-modules.md, "Zones and subnets"),
    # then the template's network, then settings.network. None: the project's only network.
    for_each = each.value.subnet != null ? [each.value.subnet] : (each.value.network != null ? [each.value.network] : (var.settings.network != null ? [var.settings.network] : []))
    content {
      name = network.value
    }
  }

  dynamic "block_device" {
    for_each = each.value.disk_gb == null ? [] : [each.value.disk_gb]
    content {
      uuid                  = data.openstack_images_image_v2.boot[each.value.image].id
      source_type           = "image"
      destination_type      = "volume"
      volume_size           = block_device.value
      volume_type           = var.settings.volume_type
      boot_index            = 0
      delete_on_termination = true
    }
  }

  dynamic "scheduler_hints" {
    for_each = contains(keys(each.value.extra), "server_group") ? [each.value.extra["server_group"]] : []
    content {
      group = scheduler_hints.value
    }
  }

  lifecycle {
    # What a server was launched with stays: a changed template (image, flavor, cloud-init,
    # disk, name) applies to new servers only. Without this Nova would rebuild (image), resize
    # (flavor) or replace (user data) a running host. Metadata and tags stay managed.
    ignore_changes = [name, image_name, flavor_name, user_data, block_device, availability_zone, network]

    precondition {
      condition = (
        local.tags[each.key]["xce:cluster"] == var.common_tags["xce:cluster"] &&
        local.tags[each.key]["xce:provider"] == var.common_tags["xce:provider"]
      )
      error_message = "Instance ${each.key}: its tags override xce:cluster or xce:provider with a value other than common_tags'; the instance would escape this cluster's listing."
    }

    precondition {
      condition = alltrue([
        for t in local.server_tags[each.key] : length(t) <= 60 && !strcontains(t, "/") && !strcontains(t, ",")
      ]) && length(local.server_tags[each.key]) <= 50
      error_message = "Instance ${each.key}: an owner tag \"key=value\" is longer than 60 characters or contains \"/\" or \",\" (Nova server tag rules)."
    }
  }
}

# The Terraform OpenStack provider has no data source listing servers (openstack_compute_instance_v2
# reads one server by id), so this module cannot list what carries the cluster's tag. Nova itself
# can: GET /servers?tags=xce:cluster=<cluster> (microversion 2.26). See docs/provider-modules.md.
