"""The system tier: the product as an operator meets it: tmux and a real terminal, Chromium,
network and PID namespaces for machines, the demo, soaks and load."""
