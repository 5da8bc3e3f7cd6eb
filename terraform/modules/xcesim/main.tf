locals {
  # Per-instance tags: the common owner and site tags, then the instance's own tags.
  tags = { for key, inst in var.instances : key => merge(var.common_tags, inst.tags) }
}

resource "xcesim_instance" "this" {
  for_each = var.instances

  name      = each.value.name
  flavor    = each.value.flavor
  image     = each.value.image
  tags      = local.tags[each.key]
  user_data = each.value.user_data
  # The instance's offering's placement (null: wherever the cloud chooses); a zone's capacity
  # limit refuses a create in that zone only.
  zone   = each.value.zone
  subnet = each.value.subnet
  # A second create with the same key returns the same instance: a retried apply after a
  # crash between the cloud call and the state write does not launch a twin.
  client_token = each.key
  # Warm-pool instances only (null elsewhere: the instance's power is left as it is); a change
  # is an in-place stop or start, never a replacement.
  power_state = each.value.power_state

  lifecycle {
    # What an instance was launched with stays: a changed template (image, flavor, cloud-init,
    # host name) applies to new instances only and never replaces or restarts a running host.
    # Tags stay managed, so tag drift is corrected in place.
    ignore_changes = [name, flavor, image, user_data, zone, subnet]

    precondition {
      condition = (
        local.tags[each.key]["xce:cluster"] == var.common_tags["xce:cluster"] &&
        local.tags[each.key]["xce:provider"] == var.common_tags["xce:provider"]
      )
      error_message = "Instance ${each.key}: its tags override xce:cluster or xce:provider with a value other than common_tags'; the instance would escape this cluster's listing."
    }
  }
}

# Every object carrying this cluster's tag, whoever made it: the cloud's view for orphan
# detection. No depends_on on purpose: the listing must be read during plan (and refresh-only
# plan), not deferred to apply.
# recently_terminated: instances terminated in the last hour are listed too, with their
# state_reason, so that a spot reclaim is told apart from an out-of-band delete (host loss).
# settings.list_tagged false (every shard of a provider but shard 0): not read at all, so the
# listing is read once per provider and a shard's state holds only its own instances.
data "xcesim_instances" "tagged" {
  count = var.settings.list_tagged ? 1 : 0

  tags                = { "xce:cluster" = var.common_tags["xce:cluster"] }
  recently_terminated = true
}

locals {
  listed = flatten([for listing in data.xcesim_instances.tagged : listing.instances != null ? listing.instances : []])
}

# Baked images (xceprov image bake, docs/images.md): each made once from its builder instance,
# which is returned afterwards; the image keeps what it was made from. Tags stay managed.
locals {
  # Per-image tags: the common owner and site tags, then the image's own (kind, template, built-from).
  image_tags = { for key, img in var.images : key => merge(var.common_tags, img.tags) }
}

resource "xcesim_image" "this" {
  for_each = var.images

  name        = each.value.name
  instance_id = each.value.instance_id
  tags        = local.image_tags[each.key]

  lifecycle {
    # An image is never remade: the builder it came from is gone once the bake ends.
    ignore_changes = [name, instance_id]
  }
}

# Every available image carrying this cluster's tag, whoever made it: `xceprov image list`,
# `bake:newest` and the orphan scan read it. Read with the instance listing (shard 0 only).
data "xcesim_images" "tagged" {
  count = var.settings.list_tagged ? 1 : 0

  tags = { "xce:cluster" = var.common_tags["xce:cluster"] }
}

locals {
  listed_images = flatten([for listing in data.xcesim_images.tagged : listing.images != null ? listing.images : []])
}
