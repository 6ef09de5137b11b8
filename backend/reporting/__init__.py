"""What every report writes: figure files (PNG through kaleido) and the HTML page."""
