"""What the notebooks run: experiment helpers, interactive explorers that run experiments,
drafter x gamma x category grids, the deployment checklist, the policy lab and the demo."""
