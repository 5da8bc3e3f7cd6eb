output "instances" {
  description = "Every managed server, keyed by instance key: id, name, address (first fixed IPv4), launch_time (Nova's created, RFC 3339) and the metadata Nova reports."
  value = {
    for key, inst in openstack_compute_instance_v2.this : key => {
      id          = inst.id
      name        = inst.name
      address     = inst.access_ip_v4
      launch_time = inst.created
      tags        = inst.all_metadata
    }
  }
}

output "tagged" {
  description = "Always empty: the OpenStack provider offers no server listing by tag (see tagged_supported)."
  value       = {}
}

output "tagged_supported" {
  description = "Whether `tagged` is a real listing of the cloud: false here. The orchestrator must treat the cloud view as unread and take no orphan action from it."
  value       = false
}

output "images" {
  description = "Always empty: the OpenStack provider has no resource that snapshots a server into an image (docs/images.md); the images variable must stay empty."
  value       = {}
}

output "tagged_images" {
  description = "Always empty: this module makes and lists no images (docs/images.md)."
  value       = {}
}
