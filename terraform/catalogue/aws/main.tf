# Catalogue root of an AWS account and region: the instance types offered in the region
# (aws_ec2_instance_types, narrowed by settings.catalogue_filters), each described by
# aws_ec2_instance_type (vCPUs, memory, GPUs), with the availability zones that offer it
# (aws_ec2_instance_type_offerings by availability-zone). EC2's API gives no price: every
# cost_per_hour is null and a template's select: prices by its cost_per_cpu_hour.
# Output `flavors`, the one shape every catalogue root gives (README.md). Data sources and
# outputs only: nothing in the account changes.

terraform {
  required_version = ">= 1.5.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0.0, < 7.0.0"
    }
  }
}

variable "settings" {
  description = "The provider's module settings (providers.<name>.settings); region and profile are read here, and catalogue_filters: EC2 DescribeInstanceTypes filters (name -> values), default current-generation x86_64."
  type        = any
}

provider "aws" {
  region  = var.settings.region
  profile = try(var.settings.profile, null)
}

locals {
  # Every type of a region is several hundred lookups: the filters keep the catalogue to the
  # families a site can use.
  filters = try(var.settings.catalogue_filters, {
    "current-generation"                    = ["true"]
    "processor-info.supported-architecture" = ["x86_64"]
  })
}

data "aws_ec2_instance_types" "offered" {
  dynamic "filter" {
    for_each = local.filters
    content {
      name   = filter.key
      values = filter.value
    }
  }
}

data "aws_ec2_instance_type" "each" {
  for_each      = toset(data.aws_ec2_instance_types.offered.instance_types)
  instance_type = each.key
}

# By availability zone, in chunks: a filter takes a bounded number of values.
data "aws_ec2_instance_type_offerings" "zones" {
  for_each      = { for i, chunk in chunklist(sort(data.aws_ec2_instance_types.offered.instance_types), 100) : tostring(i) => chunk }
  location_type = "availability-zone"
  filter {
    name   = "instance-type"
    values = each.value
  }
}

locals {
  offered_in = flatten([
    for chunk in data.aws_ec2_instance_type_offerings.zones : [
      for i, t in chunk.instance_types : { type = t, zone = chunk.locations[i] }
    ]
  ])
  zones_of = { for o in local.offered_in : o.type => o.zone... }
}

output "flavors" {
  description = "Every instance type the filters select: name, cpus (default vCPUs), memory_gb, gpus, cost_per_hour (always null: EC2 gives no price), zones."
  value = [
    for name, t in data.aws_ec2_instance_type.each : {
      name          = name
      cpus          = t.default_vcpus
      memory_gb     = t.memory_size / 1024
      gpus          = sum(concat([0], [for g in t.gpus : g.count]))
      cost_per_hour = null
      zones         = sort(lookup(local.zones_of, name, []))
    }
  ]
}
