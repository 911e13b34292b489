"""The leaderboard: stored runs, the comparability guard, bootstrap statistics and the generated tables and page.

Everything under `leaderboards/<suite>/` except `runs/` is a pure function of the stored runs, so
anyone can rebuild it and check that the published numbers come from the published records.
"""
