"""Training stages: cold-start synthesis (synth), supervised fine-tuning (sft), GRPO (grpo)."""
