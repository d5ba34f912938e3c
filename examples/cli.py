"""What every example does at its command line: an expected failure (no GPU, no dataset, a
corrupt file, a folder that cannot be written) is one clean line with the library's message,
not a traceback. Programming errors still show their traceback.

    if __name__ == "__main__":
        import cli
        cli.run(main)
"""
import os
import sys

import minigrad as mg

EXPECTED = (mg.DeviceError, mg.data.DatasetNotFoundError, mg.data.ChecksumError,
            mg.data.DownloadError, mg.CheckpointError, OSError)


def run(main):
    """Call `main()`; an expected error ends the program with exit status 1 and the line
    `<example>: error: <message>` on stderr."""
    try:
        return main()
    except EXPECTED as error:
        sys.exit(f"{os.path.basename(sys.argv[0])}: error: {error}")
