terraform {
  required_providers {
    gpucloud = {
      source  = "gpucloud/gpucloud"
      version = "~> 0.1"
    }
  }
}

# Prefer the environment: GPUCLOUD_ENDPOINT and GPUCLOUD_API_KEY.
provider "gpucloud" {
  endpoint        = "http://127.0.0.1:8080"
  request_timeout = "30s"
  max_retries     = 4
}
