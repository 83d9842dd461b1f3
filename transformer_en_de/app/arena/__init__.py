"""The arena: blind battles between two systems, their votes in SQLite, a Bradley–Terry leaderboard, publishing."""
