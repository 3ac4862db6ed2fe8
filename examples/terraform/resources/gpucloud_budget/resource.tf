# 5,000 USD a month for the clusters labelled team = "nlp": alerts at 50, 80 and 100 %, and no new
# clusters for the team once it is spent (until the month ends or the amount is raised).
resource "gpucloud_budget" "nlp" {
  name         = "nlp monthly"
  amount_usd   = 5000
  label_filter = { key = "team", value = "nlp" }
  thresholds   = [50, 80, 100]
  action       = "block_new"
}
