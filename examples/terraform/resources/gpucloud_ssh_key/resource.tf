resource "gpucloud_ssh_key" "laptop" {
  name = "alice-laptop"
  # The trailing newline of the file is not a change; a different key replaces the resource.
  public_key = file("~/.ssh/id_ed25519.pub")
}

output "ssh_key_fingerprint" {
  value = gpucloud_ssh_key.laptop.fingerprint
}
