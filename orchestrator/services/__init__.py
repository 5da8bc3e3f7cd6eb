"""Services: one typed function per user-visible action; the CLI only parses and prints."""
