variable "team" {
  type        = string
  description = "Owning team. Prefixes the cluster and volume names and becomes the `team` label, so teams sharing one project never collide."

  validation {
    condition     = can(regex("^[a-z][a-z0-9]{1,15}$", var.team))
    error_message = "team must be 2-16 lowercase letters or digits, starting with a letter (it prefixes hostnames)."
  }
}

variable "name" {
  type        = string
  description = "Cluster name within the team. The cluster is called `<team>-<name>` and its nodes `<team>-<name>-<index>`."

  validation {
    condition     = can(regex("^[a-z]([a-z0-9-]*[a-z0-9])?$", var.name))
    error_message = "name must be lowercase letters, digits or hyphens, start with a letter and not end with a hyphen."
  }

  validation {
    condition     = length(var.team) + 1 + length(var.name) <= 40
    error_message = "The cluster name \"<team>-<name>\" must be at most 40 characters."
  }
}

variable "region" {
  type        = string
  description = "Region of the cluster and its volume, e.g. `us-east-1` (the `gpucloud_regions` data source lists them)."
  default     = "us-east-1"

  validation {
    condition     = can(regex("^[a-z]{2}-[a-z]+-[0-9]+$", var.region))
    error_message = "region must look like us-east-1."
  }
}

variable "instance_type" {
  type        = string
  description = "Node shape. Multi-node clusters need an 8-GPU fabric shape; 1xH100 is for single-node work."
  default     = "8xH100"

  validation {
    condition     = contains(["1xH100", "8xH100", "8xH100-EFA", "8xH200", "8xB200"], var.instance_type)
    error_message = "instance_type must be one of 1xH100, 8xH100, 8xH100-EFA, 8xH200, 8xB200."
  }
}

variable "node_count" {
  type        = number
  description = "Number of nodes. Scales in place."
  default     = 1

  validation {
    condition     = var.node_count >= 1 && var.node_count <= 64 && floor(var.node_count) == var.node_count
    error_message = "node_count must be a whole number from 1 to 64."
  }

  validation {
    condition     = var.node_count == 1 || startswith(var.instance_type, "8x")
    error_message = "Only 8-GPU instance types (8xH100, 8xH100-EFA, 8xH200, 8xB200) can form multi-node clusters."
  }
}

variable "orchestrator" {
  type        = string
  description = "`slurm`, `kubernetes` or `none` (bare nodes; single-node clusters only). Changing it replaces the cluster."
  default     = "slurm"

  validation {
    condition     = contains(["slurm", "kubernetes", "none"], var.orchestrator)
    error_message = "orchestrator must be slurm, kubernetes or none."
  }

  validation {
    condition     = var.orchestrator != "none" || var.node_count == 1
    error_message = "A multi-node cluster needs orchestrator slurm or kubernetes."
  }
}

variable "volume_size_tib" {
  type        = number
  description = "Size in TiB of a shared volume created for the cluster and mounted on every node; 0 for none. Grows in place, never shrinks."
  default     = 0

  validation {
    condition     = var.volume_size_tib >= 0 && var.volume_size_tib <= 1024 && floor(var.volume_size_tib) == var.volume_size_tib
    error_message = "volume_size_tib must be a whole number from 0 (no volume) to 1024."
  }
}

variable "extra_volume_ids" {
  type        = set(string)
  description = "Ids of existing shared volumes (same region) to mount as well, e.g. another cluster's `volume_id` output."
  default     = []
}

variable "billing" {
  type = object({
    type          = optional(string, "on_demand")
    duration_days = optional(number)
    on_expiry     = optional(string, "decommission")
  })
  description = "`on_demand` (per second) or `reserved` for `duration_days` (1-90) at a discount. Changing type or term replaces the cluster."
  default     = {}

  validation {
    condition     = contains(["on_demand", "reserved"], var.billing.type)
    error_message = "billing.type must be on_demand or reserved."
  }

  validation {
    condition = (
      var.billing.type == "reserved"
      ? try(var.billing.duration_days >= 1 && var.billing.duration_days <= 90, false)
      : var.billing.duration_days == null
    )
    error_message = "Reserved billing needs duration_days from 1 to 90; on_demand billing takes no duration_days."
  }

  validation {
    condition     = contains(["decommission", "convert_to_on_demand"], var.billing.on_expiry)
    error_message = "billing.on_expiry must be decommission or convert_to_on_demand."
  }
}

variable "ssh_key_ids" {
  type        = set(string)
  description = "Ids of `gpucloud_ssh_key`s allowed to log in."
  default     = []
}

variable "labels" {
  type        = map(string)
  description = "Extra labels. `team`, `managed-by` and `module` are always set by the module."
  default     = {}
}

variable "max_hourly_cost_usd" {
  type        = number
  description = "Budget guard: plans that would cost more per hour than this fail. null for no limit."
  default     = null

  validation {
    condition     = var.max_hourly_cost_usd == null || try(var.max_hourly_cost_usd > 0, false)
    error_message = "max_hourly_cost_usd must be positive (or null for no limit)."
  }
}
