"""What the jobs leave for a person: Parquet and CSV tables, and one self-contained HTML report."""
