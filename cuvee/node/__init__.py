"""What every Cuvee process shares, whatever its role: config files and the HTTP service it runs."""
