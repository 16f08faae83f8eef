"""A target file that raises while it runs."""
raise RuntimeError("this file refuses to load")
