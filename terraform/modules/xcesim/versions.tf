terraform {
  # optional() attribute defaults need 1.3; preconditions with dynamic messages 1.2;
  # 1.5 is the oldest release the modules are written against.
  required_version = ">= 1.5.0"

  required_providers {
    xcesim = {
      source  = "xce/xcesim"
      version = ">= 0.1.0, < 0.2.0"
    }
  }
}
