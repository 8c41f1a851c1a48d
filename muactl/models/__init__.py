"""Language models: local weights (registry), chat formats (chatml, formats) and API calls (llm)."""
