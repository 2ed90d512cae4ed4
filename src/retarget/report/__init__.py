"""Reports for people: text tables (table.py); plots and traces as they come."""
