"""Domain specs: reading the YAML files (source, load), their schema (models, task_templates), where domains live (library)."""
