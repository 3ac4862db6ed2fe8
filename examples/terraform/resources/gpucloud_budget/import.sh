# Import a budget by its id.
terraform import gpucloud_budget.nlp bud_01hzy3k3v5mz3c5b6w0x7d9e1f
