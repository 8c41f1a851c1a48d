"""One episode: agents and the user simulator take turns over a sandbox (rollout); reward and fidelity score it."""
