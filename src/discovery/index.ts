/**
 * Discovery (issue 4): the index of documents and mapped table rows in the control database, the
 * governed search behind interlock_discover and interlock_related_documents, get_document
 * connector requests, the demo handbook and benchmark helpers. See docs in each module.
 */
export * from './types';
export { indexSource, indexAssets, contentHash, getIndexStatus, listIndexStatus, formatIndexProgress, type IndexOptions } from './indexer';
export { readDocumentsFolder, documentFromText, splitFrontMatter, DocumentsFolderError } from './documents';
export { readDocumentTables, fieldColumns, DocumentTableError } from './tables';
export { decideRelations, loadLineage, type FieldState, type RelationAccess, type RelationLineage } from './fields';
export { buildScope, resolveScope, mayAct, visibilitySql, type DiscoveryScope } from './access';
export { searchAssets, relatedAssets, getDocument, assetVisible, type DiscoverFilters, type SearchOptions } from './search';
export { provisionHandbook, HANDBOOK_PATH, HANDBOOK_ROLE, type ProvisionHandbookOptions } from './handbook';
export { benchDiscovery, generateDocuments, indexGeneratedCorpus, timeSearches, benchScope, benchQueries, summarise, type DiscoveryBenchReport, type LatencySummary } from './bench';
