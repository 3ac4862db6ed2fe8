# A reservation is imported by its id.
terraform import gpucloud_reservation.h100_week rsv_01hzy3k3v5mz3c5b6w0x7d9e1f
