# Import a security group by its id (the project's default group too, to manage its rules).
terraform import gpucloud_security_group.lab sgr_01hzy3k3v5mz3c5b6w0x7d9e1f
