output "instances" {
  description = "Every managed instance, keyed by instance key: id, name (Name tag), address (private or public IP per settings.address), launch_time (RFC 3339) and the tags EC2 reports."
  value = {
    for key, inst in aws_instance.this : key => {
      id          = inst.id
      name        = var.instances[key].name
      address     = var.settings.address == "public" ? inst.public_ip : inst.private_ip
      launch_time = data.aws_instance.launched[key].launch_time
      tags        = inst.tags_all
    }
  }
}

output "tagged" {
  description = "Every instance in a live state (pending, running, shutting-down, stopping, stopped) carrying this cluster's xce:cluster tag as listed when the data sources were last read (plan or refresh), keyed by instance id: id, name, address, launch_time, state, tags."
  value = {
    for id, inst in data.aws_instance.tagged : id => {
      id          = id
      name        = lookup(inst.tags, "Name", "")
      address     = var.settings.address == "public" ? inst.public_ip : inst.private_ip
      launch_time = inst.launch_time
      state       = inst.instance_state
      tags        = inst.tags
    }
  }
}

output "tagged_supported" {
  description = "Whether `tagged` is a real listing of the cloud (settings.list_tagged, true unless the orchestrator left the listing out of this state). When false, `tagged` is empty and says nothing: the cloud view counts as unread."
  value       = var.settings.list_tagged
}

output "images" {
  description = "Every managed AMI, keyed by image key: id, name, instance_id (the builder it was made from), created_at (empty: EC2 reports it on the listing) and the tags EC2 reports."
  value = {
    for key, img in aws_ami_from_instance.this : key => {
      id          = img.id
      name        = img.name
      instance_id = img.source_instance_id
      created_at  = ""
      tags        = img.tags_all
    }
  }
}

output "tagged_images" {
  description = "Every AMI of this account carrying this cluster's xce:cluster tag as listed when the data sources were last read (plan or refresh), keyed by AMI id: id, name, instance_id (empty: EC2 does not report it), created_at (creation_date), state, tags."
  value = {
    for id, img in data.aws_ami.tagged : id => {
      id          = id
      name        = img.name
      instance_id = ""
      created_at  = img.creation_date
      state       = img.state
      tags        = img.tags
    }
  }
}
