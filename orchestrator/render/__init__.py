"""Host templates (Jinja2) rendered into Terraform variables and cloud-init user data."""
