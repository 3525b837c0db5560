from ocelli_replay.cli import main

raise SystemExit(main())
