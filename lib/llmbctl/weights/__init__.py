"""Controller-side weights work: who fetches from where (plan)."""
