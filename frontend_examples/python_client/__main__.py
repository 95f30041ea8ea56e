import sys

from frontend_examples.python_client.client import main

sys.exit(main())
