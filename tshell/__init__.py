"""tshell: the TF-on-K8s command line (pack and upload bundles, submit and watch training runs)."""
