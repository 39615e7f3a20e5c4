"""Operations (``python -m shared.ops``): Event Grid dead-letter replay and the backlog report.

Commands run on the services ``shared.composition`` builds for the app (``get_services``). May
import every capability of ``shared``; SDK calls stay in ``adapters``.
"""
