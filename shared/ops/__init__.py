"""Operations (``python -m shared.ops``): Event Grid dead-letter replay and the backlog report.

Commands wire their own services through ``shared.composition`` like the app does. May
import every capability of ``shared``; SDK calls stay in ``adapters``.
"""
