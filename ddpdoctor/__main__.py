import sys

from ddpdoctor.cli import main

sys.exit(main())
