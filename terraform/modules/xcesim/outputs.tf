output "instances" {
  description = "Every managed instance, keyed by instance key: id, name, address, launch_time (RFC 3339) and the tags the cloud reports."
  value = {
    for key, inst in xcesim_instance.this : key => {
      id          = inst.id
      name        = inst.name
      address     = inst.address
      launch_time = inst.launch_time
      tags        = inst.tags
    }
  }
}

output "tagged" {
  description = "Every instance carrying this cluster's xce:cluster tag as listed when the data source was last read (plan or refresh), keyed by cloud id: id, name, address, launch_time, state, state_reason, terminated_at, tags. Live instances, and those terminated in the last hour (state terminated, state_reason e.g. spot-reclaim, terminated_at RFC 3339)."
  value = {
    for inst in local.listed : inst.id => {
      id           = inst.id
      name         = inst.name
      address      = inst.address
      launch_time  = inst.launch_time
      state        = inst.state
      state_reason = inst.state_reason
      # When the cloud terminated it (null while live): a loss ends there (docs/cost.md).
      terminated_at = inst.terminated_at
      tags          = inst.tags
    }
  }
}

output "tagged_supported" {
  description = "Whether `tagged` is a real listing of the cloud (settings.list_tagged, true unless the orchestrator left the listing out of this state). When false, `tagged` is empty and says nothing: the cloud view counts as unread."
  value       = var.settings.list_tagged
}

output "images" {
  description = "Every managed image, keyed by image key: id, name, instance_id (the builder it was made from), created_at and the tags the cloud reports."
  value = {
    for key, img in xcesim_image.this : key => {
      id          = img.id
      name        = img.name
      instance_id = img.instance_id
      created_at  = img.created_at
      tags        = img.tags
    }
  }
}

output "tagged_images" {
  description = "Every available image carrying this cluster's xce:cluster tag as listed when the data source was last read (plan or refresh), keyed by image id: id, name, instance_id, created_at, state, tags. Empty when tagged_supported is false."
  value = {
    for img in local.listed_images : img.id => {
      id          = img.id
      name        = img.name
      instance_id = img.instance_id
      created_at  = img.created_at
      state       = img.state
      tags        = img.tags
    }
  }
}
