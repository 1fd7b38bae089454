"""One module per `mpsprobe` subcommand: option parsing and output only."""
