variable "hosts" {
  description = "Your servers: an IP address or DNS name each, with a port when sshd is not on ssh_port."
  type = list(object({
    address = string
    port    = optional(number)
  }))
  default = [{ address = "10.0.0.5" }, { address = "10.0.0.6" }]
}

variable "region" {
  description = "Where your servers are: a name of yours (lowercase letters, digits, -). The cluster is in it."
  type        = string
  default     = "on-prem"
}

variable "ssh_user" {
  description = "User the backend logs in as on every server: root, or one with passwordless sudo."
  type        = string
  default     = "root"
}

variable "pool_private_key_file" {
  description = "The pool's private key (no passphrase); its public half is in authorized_keys of ssh_user on every server."
  type        = string
  default     = "~/.ssh/gpucloud_pool"
}

variable "node_count" {
  description = "Servers the cluster takes from the pool: one free, ready host per node. Scales in place."
  type        = number
  default     = 2
}

variable "ssh_public_key_file" {
  description = "Your public key, allowed to log in to the cluster as its user."
  type        = string
  default     = "~/.ssh/id_ed25519.pub"
}
