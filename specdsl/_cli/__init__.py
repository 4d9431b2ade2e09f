"""The command line: argparse, output, user modules and the working folder."""
