"""A domain opened for use: spec, compiled tools and tasks (validate), and tasks drawn from task templates."""
