"""What a person or a tool reads: kubectl-style answers, text, tables, Markdown, PolicyReports."""
