# Import a host pool by its id. The private key cannot be imported: keep ssh_private_key_wo with
# ssh_private_key_wo_version (or ssh_private_key) in the configuration, and the first apply after the
# import sends the key again.
terraform import gpucloud_host_pool.lab hpl_01hzy3m1q8r2t6v9w4x5y7z0ab
